"""The sweeper: fires the timers (timeouts, decision windows, escalations,
reminders) on arq, reaps callers that are gone, gives back what groups with no live
replica hold, and beats so health checks can tell it is there. May use:
`askq.observing`, `askq.seam`, `askq.redis`, `askq.protocol`."""
