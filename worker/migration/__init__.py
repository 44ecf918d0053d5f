"""Migrations from other tools: ``connect mm2 import`` (MirrorMaker 2)."""
