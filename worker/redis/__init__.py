"""askq on Redis: connections (single node, Cluster, Sentinel), their errors told
apart (refused, lost, full), the shards and the key names, the Lua scripts (`lua/`) and
the one runner that calls them, the reader of a request's state, heartbeats, and the
arq pool the sweeper and the channels' sends use. May use: `askq.protocol`."""
