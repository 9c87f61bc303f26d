"""Relations between served kinds, as data: which field leads from an object to which others.

Each :class:`Relation` becomes a field on the source kind's GraphQL type when both kinds are
served (:mod:`gateway.graphql.resolvers.links` resolves them, batched per request: N parents cost
one
upstream list per target kind and namespace, never one call per parent).  Adding a relation is
a line here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Rule = Literal["owner", "owned", "by-name", "names-me", "same-name", "involved"]
"""How the related objects are found:

* ``owner``: the object in ``metadata.ownerReferences`` whose kind is the target's (same
  namespace, and the same uid: a newer object of that name is not the owner);
* ``owned``: target objects in the same namespace with an owner reference to this uid;
* ``by-name``: the target object named by this object's field at ``path`` (cluster-scoped
  targets, or the same namespace);
* ``names-me``: target objects whose field at ``path`` holds this object's name (the
  reverse of ``by-name``; for a cluster-scoped source, across every namespace);
* ``same-name``: the target object with this object's namespace and name (Service and its
  Endpoints);
* ``involved``: Events whose ``involvedObject`` is this object (by uid).
"""


@dataclass(frozen=True, slots=True)
class Relation:
    """A field ``name`` on objects of ``source`` leading to objects of ``target``.

    ``source`` and ``target`` are registry keys (``pods``, ``deployments.apps``); ``source``
    ``*`` means every served kind that has no field of that name yet.
    """

    source: str
    name: str
    target: str
    rule: Rule
    many: bool
    description: str
    path: tuple[str, ...] = ()


RELATIONS: tuple[Relation, ...] = (
    Relation("deployments.apps", "replicaSets", "replicasets.apps", "owned", True,
             "The ReplicaSets this Deployment owns."),
    Relation("replicasets.apps", "deployment", "deployments.apps", "owner", False,
             "The Deployment that owns this ReplicaSet."),
    Relation("replicasets.apps", "pods", "pods", "owned", True,
             "The Pods this ReplicaSet owns."),
    Relation("pods", "replicaSet", "replicasets.apps", "owner", False,
             "The ReplicaSet that owns this Pod."),
    Relation("statefulsets.apps", "pods", "pods", "owned", True,
             "The Pods this StatefulSet owns."),
    Relation("daemonsets.apps", "pods", "pods", "owned", True,
             "The Pods this DaemonSet owns."),
    Relation("jobs.batch", "pods", "pods", "owned", True, "The Pods this Job owns."),
    Relation("cronjobs.batch", "jobs", "jobs.batch", "owned", True,
             "The Jobs this CronJob owns."),
    Relation("pods", "node", "nodes", "by-name", False,
             "The Node this Pod is scheduled to (`spec.nodeName`).", ("spec", "nodeName")),
    Relation("nodes", "pods", "pods", "names-me", True,
             "The Pods scheduled to this Node, in every namespace.", ("spec", "nodeName")),
    Relation("services", "endpoints", "endpoints", "same-name", False,
             "The Endpoints of this Service (its addresses lead on to the Pods)."),
    Relation("endpoints", "service", "services", "same-name", False,
             "The Service these Endpoints belong to."),
    Relation("*", "events", "events", "involved", True,
             "Events whose involvedObject is this object (batched per request)."),
)  # fmt: skip
