"""Test helpers shared by several test folders: the scripted model server, process checks,
the CUDA accuracy cases, the SASS tools' mma loop."""
