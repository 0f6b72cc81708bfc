"""What operators see: the audit trail of a request, the recent settlements, the
status of the groups and the pending requests, the fleet's trends, the Prometheus
metrics and their endpoint, the log formats. Reads, never a request's transition. May
use: `askq.seam`, `askq.redis`, `askq.protocol`."""
