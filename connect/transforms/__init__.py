"""Transforms and predicates (Kafka Connect's single message transforms, KIP-66, and KIP-585).

- :mod:`connect.transforms.base`: :class:`Transformation` and :class:`Predicate`, what a plugin subclasses;
- :mod:`connect.transforms.chain`: the ``transforms`` / ``predicates`` keys parsed and built into steps;
- :mod:`connect.transforms.registry`: built-ins by Kafka Connect's names, plugins by entry point;
- built-ins: :mod:`~connect.transforms.routing`, :mod:`~connect.transforms.headers`,
  :mod:`~connect.transforms.fields`, :mod:`~connect.transforms.reshape`,
  :mod:`~connect.transforms.predicates`; what field transforms read: :mod:`~connect.transforms.payload`.
"""

from connect.transforms.base import Predicate, Transformation, TransformError
from connect.transforms.chain import (
    PredicateSpec,
    TransformsConfig,
    TransformSpec,
    is_transforms_key,
    load_transforms,
    parse_transforms,
)
from connect.transforms.registry import (
    PREDICATE_GROUP,
    TRANSFORM_GROUP,
    list_transform_plugins,
    register_predicate,
    register_transform,
    resolve_predicate,
    resolve_transform,
)

__all__ = ["Transformation", "Predicate", "TransformError", "TransformsConfig", "TransformSpec", "PredicateSpec",
           "parse_transforms", "load_transforms", "is_transforms_key", "resolve_transform", "resolve_predicate",
           "list_transform_plugins", "register_transform", "register_predicate", "TRANSFORM_GROUP", "PREDICATE_GROUP"]
