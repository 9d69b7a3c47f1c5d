"""Test helpers shared by several test folders (the scripted model server)."""
