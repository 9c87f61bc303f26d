"""The endpoints the application mounts: ``/graphql`` (``GraphQLApp``), the live schemas
and ``/apis/{group}/graphql``, ``/fleet/graphql``, ``/clusters/{name}/graphql``.
"""
