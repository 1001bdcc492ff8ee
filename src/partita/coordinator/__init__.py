"""Coordinators: idempotent producer state, and (later) consumer groups and offsets."""
