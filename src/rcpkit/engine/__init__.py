"""rcpkit.engine"""
