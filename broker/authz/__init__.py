"""Authorisation on the client listener: who is asking, what the ACLs say, what to answer.

* ``principal.py``: the principal (``User:<CN>`` of a verified TLS client certificate, else
  ``User:ANONYMOUS``) and host of a call;
* ``gate.py``: the decision for one (principal, host, operation, resource), from the ACLs in
  this broker's metadata image (tidelog.acl.Authorizer, rebuilt when they change), with the
  audit line and the metric of every refusal;
* ``rpcs.py``: what each BrokerService RPC requires (Kafka's checks per API) and how a refused
  part is answered: refused topics, groups or partitions get TOPIC/GROUP/CLUSTER_AUTHORIZATION
  _FAILED in their own entries and the rest of the request is served; Metadata and ListGroups
  leave out what the principal may not describe.

Off unless ``[authorization] enabled = true`` (tidelog/config.py); then every client RPC goes
through it. docs/security.md lists the checks.
"""
