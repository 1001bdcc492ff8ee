"""Replication: what a leader knows of its followers (high watermark, ISR), how a
follower finds where its log diverged, and the fetchers that copy the leaders' logs."""
