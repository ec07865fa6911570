"""The group coordinator (KIP-848): a pure shard per ``__consumer_offsets`` partition (records and
responses out, like the controller's managers), the server-side assignors, and a thin runtime.

Being built for issue 10; see docs/groups.md once it lands.
"""
