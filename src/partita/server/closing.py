"""The one way a handler says "this request cannot be answered; drop the connection"."""


class CloseConnectionError(Exception):
    """Raised by the framing layer or a handler; the network layer closes that one
    connection and logs the reason. Other connections and stored data are unaffected."""
