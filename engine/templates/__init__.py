"""Jinja chat templates shipped with the engine (package data)."""
