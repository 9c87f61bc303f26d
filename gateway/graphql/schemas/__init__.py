"""Whole schemas from the resolvers: the seed schema, the kinds a catalog discovers
(OpenAPI v3), a group's schema, and the library of types they share.
"""
