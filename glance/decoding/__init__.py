"""The round loop and its parts: the request and its stats, verify, walk and
commit, sampling, the target's cache, relaxed acceptance rules.
"""
