"""rcpkit.conformance"""
