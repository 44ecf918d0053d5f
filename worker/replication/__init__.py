"""Replication across a mesh: one path per record (topology), replicator onboarding (PIP-18) and its CLI."""
