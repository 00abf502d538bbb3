"""The desktop apps written for the project (Tk): they run inside the desktop container with its python3.

The host imports only :mod:`formula`, so that task checkers evaluate spreadsheet cells exactly
as the Sheet app does; the other modules are copied into the container and started there.
"""
