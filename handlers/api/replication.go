package api

// Replication is /readyz's detail with several replicas on PostgreSQL:
// leadership and the health of the leases.
type Replication struct {
	Replica         string `json:"replica" doc:"this replica's id"`
	InternalURL     string `json:"internal_url" doc:"where the other replicas reach this one"`
	Leader          bool   `json:"leader" doc:"this replica holds the leader lease (runs the singleton loops)"`
	LeaderReplica   string `json:"leader_replica" doc:"the replica holding the leader lease ('' if it expired)"`
	LeaderEpoch     int64  `json:"leader_epoch" doc:"the leader lease's epoch (grows each time it changes hands)"`
	Replicas        int    `json:"replicas" doc:"live replicas (registration not expired)"`
	VMLeasesHeld    int    `json:"vm_leases_held" doc:"VM channel leases this replica holds"`
	VMLeases        int    `json:"vm_leases" doc:"VM channel leases of every replica"`
	VMLeasesExpired int    `json:"vm_leases_expired" doc:"leases past their expiry: VMs waiting for adoption"`
}
