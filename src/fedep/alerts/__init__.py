"""Alerts a security team can use: one JSON line per anomalous flow record, explained,
named by the model that scored it, under fedep's names or Elastic Common Schema's; the
sink that writes them (a file rotated by size, stdout), and the controls of their
volume (grouping with a cap, per-gateway window summaries, threshold recalibration).

Shared by ``fedep score`` (JSON-lines output) and ``fedep watch`` (live logs):

* :class:`AlertFactory` (:mod:`~fedep.alerts.factory`): scores a block of records with
  the model's own pipeline and makes the alerts; :func:`model_identity` names a loaded
  model; :class:`Batch` is what a block gave;
* :data:`ID_FIELDS` (:mod:`~fedep.alerts.fields`): the identifying fields passed
  through; :func:`to_ecs` (:mod:`~fedep.alerts.ecs`): any record under ECS names;
* :class:`AlertSink` (:mod:`~fedep.alerts.sink`): JSON lines, durable at ``flush``;
* :class:`AlertGrouper`, :class:`WindowStats` (:mod:`~fedep.alerts.volume`);
* :func:`score_block` (:mod:`~fedep.alerts.scoring`): scores, flags, probabilities and
  top features of one block, as both commands compute them.

The format is described in ``docs/alerts.md``.
"""

from fedep.alerts.ecs import to_ecs
from fedep.alerts.factory import AlertFactory, Batch, model_identity
from fedep.alerts.fields import ECS_NAMES, ID_FIELDS
from fedep.alerts.scoring import feature_shares, score_block
from fedep.alerts.sink import AlertSink, encode_record
from fedep.alerts.volume import AlertGrouper, WindowStats

__all__ = [
    "AlertFactory",
    "Batch",
    "AlertSink",
    "AlertGrouper",
    "WindowStats",
    "ID_FIELDS",
    "ECS_NAMES",
    "model_identity",
    "to_ecs",
    "encode_record",
    "score_block",
    "feature_shares",
]
