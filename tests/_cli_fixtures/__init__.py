"""Third-party 'adapters' that fail in the ways a new user's own code does (for the CLI's bad-input tests)."""
