"""rcpkit.protocol"""
