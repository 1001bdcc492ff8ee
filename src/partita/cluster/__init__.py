"""Cluster metadata: topics, partitions, placement, and the stores that keep them."""
