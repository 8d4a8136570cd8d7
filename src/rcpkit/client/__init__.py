"""rcpkit.client"""
