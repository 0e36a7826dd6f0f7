"""Python clients of rollfleet.

``rollfleet.client`` talks to the trainer API (``rollout api``) over HTTP:
submit batches of episodes, read their groups, trajectories and failure
records as they finish (acknowledging each), pause and resume the fleet.
``rollfleet.wire`` (imported on its own) decodes rollfleet's msgpack messages.
"""

from .client import Batch, Client, RollfleetError, StreamError

__all__ = ["Batch", "Client", "RollfleetError", "StreamError"]
