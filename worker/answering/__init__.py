"""A group's side: the `Answerer` a channel implements and the `GroupHandle` it is
given, the runtime that runs one replica of a group (its loops, its offers, what it
did), the hooks' bounds, what a replica shows, the channel store, the retried sends,
signed links, routes, and the plugins that name the channels. May use:
`askq.observing`, `askq.seam`, `askq.redis`, `askq.protocol`."""
