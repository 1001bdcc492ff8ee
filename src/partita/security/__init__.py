"""Authentication mechanisms (SASL PLAIN and SCRAM) and credentials, sans-IO."""
