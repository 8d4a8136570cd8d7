"""rcpkit.transports"""
