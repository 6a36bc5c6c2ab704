"""fuseloop's expression IR: frozen nodes and their linearised, hashable form."""
