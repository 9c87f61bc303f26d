"""Running one operation on a schema: limits, parsing and validation (``Engine``), the
selection's projection, persisted and trusted documents, shared subscriptions, and
the admission every endpoint applies.  No transport.
"""
