"""rcpkit.server"""
