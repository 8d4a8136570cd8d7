"""rcpkit.eval"""
