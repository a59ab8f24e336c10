"""One module per benchmark: a loader for its official release format, its prompt, its scorer."""
