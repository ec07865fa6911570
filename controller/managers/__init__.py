"""Control managers: read a MetadataImage, return ``(records, response)``.

One module per aggregate (DESIGN §6): cluster_control (brokers), replication_control (topics,
partitions, leaders, ISR), config_control, producer_id_control, acl_control (ACL bindings),
scram_control (SCRAM credentials).
They are pure apart from the heartbeat soft state (broker_heartbeats) and the seeded random
source used for placement and ids; the facade in controller/control.py composes them for the
quorum loop.
"""
