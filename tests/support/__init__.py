"""Shared test utilities: a stdio subprocess driver, a frame schema validator and a
loopback HTTP server. Import as ``support.<module>`` (tests/ is on ``sys.path``)."""
