"""Draft heads: the DFlash block head and the EAGLE-style head, building, loading
and checking them.
"""
