"""partita's own client pieces (sans-IO where possible)."""
