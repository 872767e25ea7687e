"""The web console (`controlplane serve --http-listen`)."""
