"""rcpkit.federation"""
