"""The main job: NYC flights 2013 through a partita topic into a PySpark pipeline."""
