"""Kafka error codes as Python exceptions.

Every failure that can reach a client carries the numeric code a Kafka broker would
return, so the wire layer can translate an exception into a response without a lookup
table of its own.
"""

from __future__ import annotations


class KafkaError(Exception):
    """Base class: an error with a Kafka protocol error code."""

    code: int = -1
    retriable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or type(self).__name__)
        self.message = message or type(self).__name__


class UnknownServerError(KafkaError):
    code = -1


class OffsetOutOfRangeError(KafkaError):
    code = 1


class CorruptRecordError(KafkaError):
    """CORRUPT_MESSAGE: a batch failed its CRC or its header is malformed."""

    code = 2
    retriable = True


class UnknownTopicOrPartitionError(KafkaError):
    code = 3
    retriable = True


class MessageTooLargeError(KafkaError):
    """MESSAGE_TOO_LARGE: a batch is larger than max.message.bytes."""

    code = 10


class RecordBatchTooLargeError(KafkaError):
    """RECORD_LIST_TOO_LARGE: a batch cannot fit in a segment at all."""

    code = 18


class InvalidTimestampError(KafkaError):
    code = 32


class KafkaStorageError(KafkaError):
    """KAFKA_STORAGE_ERROR: the partition's files cannot be read or written."""

    code = 56
    retriable = True


class InvalidConfigurationError(KafkaError):
    """INVALID_CONFIG: a configuration value is out of range or malformed."""

    code = 40


class InvalidRecordError(KafkaError):
    """INVALID_RECORD: a batch is well-formed but breaks a broker rule."""

    code = 87


class LeaderNotAvailableError(KafkaError):
    code = 5
    retriable = True


class NotLeaderOrFollowerError(KafkaError):
    code = 6
    retriable = True


class InvalidTopicError(KafkaError):
    code = 17


class NotEnoughReplicasError(KafkaError):
    code = 19
    retriable = True


class InvalidRequiredAcksError(KafkaError):
    code = 21


class UnsupportedVersionError(KafkaError):
    code = 35


class TopicAlreadyExistsError(KafkaError):
    code = 36


class InvalidPartitionsError(KafkaError):
    code = 37


class InvalidReplicationFactorError(KafkaError):
    code = 38


class InvalidRequestError(KafkaError):
    code = 42


class PolicyViolationError(KafkaError):
    code = 44


class FetchSessionIdNotFoundError(KafkaError):
    code = 70


class TopicDeletionDisabledError(KafkaError):
    code = 73


class FencedLeaderEpochError(KafkaError):
    code = 74


class UnknownLeaderEpochError(KafkaError):
    code = 75


class OffsetNotAvailableError(KafkaError):
    """OFFSET_NOT_AVAILABLE: a leader just elected whose high watermark has not yet reached
    the start of its epoch cannot say where the partition ends (KIP-207)."""

    code = 78
    retriable = True


class UnknownTopicIdError(KafkaError):
    code = 100


class OutOfOrderSequenceError(KafkaError):
    code = 45


class InvalidProducerEpochError(KafkaError):
    code = 47


class TransactionalIdAuthorizationFailedError(KafkaError):
    """The principal may not use the transactional id, or a produce carries
    transactional batches without one."""

    code = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class TransactionalIdNotFoundError(KafkaError):
    code = 105  # TRANSACTIONAL_ID_NOT_FOUND (DescribeTransactions)


class CoordinatorLoadInProgressError(KafkaError):
    code = 14  # COORDINATOR_LOAD_IN_PROGRESS


class InvalidTxnStateError(KafkaError):
    code = 48  # INVALID_TXN_STATE


class ConcurrentTransactionsError(KafkaError):
    """The id's previous transaction is still being written or completed: ask again."""

    code = 51  # CONCURRENT_TRANSACTIONS


class OperationNotAttemptedError(KafkaError):
    """Another part of the same request failed, so this one was not tried."""

    code = 55  # OPERATION_NOT_ATTEMPTED


class UnknownProducerIdError(KafkaError):
    code = 59  # UNKNOWN_PRODUCER_ID


class UnstableOffsetCommitError(KafkaError):
    """An open transaction holds an offset for the partition (OffsetFetch, KIP-447)."""

    code = 88  # UNSTABLE_OFFSET_COMMIT


class ProducerFencedError(KafkaError):
    """A newer instance with the same transactional id bumped the epoch."""

    code = 90  # PRODUCER_FENCED


class TransactionCoordinatorFencedError(KafkaError):
    """A marker from a coordinator older than the one that last wrote for the producer."""

    code = 52  # TRANSACTION_COORDINATOR_FENCED


def error_code(exc: BaseException) -> int:
    """The Kafka error code for any exception (UNKNOWN_SERVER_ERROR if it is not ours)."""
    return exc.code if isinstance(exc, KafkaError) else UnknownServerError.code


class CoordinatorNotAvailableError(KafkaError):
    code = 15
    retriable = True


class NotCoordinatorError(KafkaError):
    code = 16
    retriable = True


class IllegalGenerationError(KafkaError):
    code = 22


class InconsistentGroupProtocolError(KafkaError):
    code = 23


class InvalidGroupIdError(KafkaError):
    code = 24


class UnknownMemberIdError(KafkaError):
    code = 25


class InvalidSessionTimeoutError(KafkaError):
    code = 26


class RebalanceInProgressError(KafkaError):
    code = 27


class NonEmptyGroupError(KafkaError):
    code = 68


class GroupIdNotFoundError(KafkaError):
    code = 69


class MemberIdRequiredError(KafkaError):
    code = 79


class FencedInstanceIdError(KafkaError):
    code = 82


class GroupSubscribedToTopicError(KafkaError):
    code = 86


class OffsetMetadataTooLargeError(KafkaError):
    code = 12


# -- the cluster -----------------------------------------------------------------------


class BrokerNotAvailableError(KafkaError):
    code = 8
    retriable = True


class ReplicaNotAvailableError(KafkaError):
    code = 9
    retriable = True


class NotEnoughReplicasAfterAppendError(KafkaError):
    """The batch was written, but the ISR shrank below min.insync.replicas before it
    was committed: the producer cannot know whether it will survive a failover."""

    code = 20
    retriable = True


class InvalidReplicaAssignmentError(KafkaError):
    code = 39


class NoReassignmentInProgressError(KafkaError):
    code = 85


class NotControllerError(KafkaError):
    code = 41
    retriable = True


class RequestTimedOutError(KafkaError):
    code = 7
    retriable = True


class StaleBrokerEpochError(KafkaError):
    code = 77


class InconsistentClusterIdError(KafkaError):
    """INCONSISTENT_CLUSTER_ID: a data directory of one cluster offered to another."""

    code = 104


# -- security ---------------------------------------------------------------------------


class UnsupportedSaslMechanismError(KafkaError):
    code = 33


class IllegalSaslStateError(KafkaError):
    code = 34


class SaslAuthenticationFailedError(KafkaError):
    code = 58


class ResourceNotFoundError(KafkaError):
    code = 91


class DuplicateResourceError(KafkaError):
    code = 92


class UnacceptableCredentialError(KafkaError):
    code = 93


class TopicAuthorizationFailedError(KafkaError):
    code = 29


class GroupAuthorizationFailedError(KafkaError):
    code = 30


class ClusterAuthorizationFailedError(KafkaError):
    code = 31


class SecurityDisabledError(KafkaError):
    code = 54
