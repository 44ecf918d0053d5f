"""Connectors shipped with the framework, one package per broker."""
