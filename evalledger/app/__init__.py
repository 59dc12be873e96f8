"""The application layer: commands that run, resume, import and read batches, and the
read side (``_repository``) that rebuilds runs from the ledger. The CLI and the viewer
ask it; it prints nothing and never exits.

Nothing is imported here: a read command imports only the module it asks.
"""
