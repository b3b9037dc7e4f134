"""The command line and the composition root: where real clients are built and handed down."""
