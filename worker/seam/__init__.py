"""The seam: the one client both sides of the queue use (`Seam`), and its roles. The
caller's side (asking, one ask's life as a `PendingAsk`, the reply waiter, the
`ask_user_question` tool and its sync wrapper), a group's transitions (accept, decline,
answer) and the registry of groups, all over the shards. May use: `askq.redis`,
`askq.protocol`."""
