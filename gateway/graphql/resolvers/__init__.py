"""The GraphQL types and resolvers generated from the core's model and operations
table (scalars, objects, arguments, relation links, streams, the ``clusters`` field),
and what a resolver runs with: the operation's context and its loaders.  Imports the
core's front door and :mod:`gateway.graphql.errors` only.
"""
