package api

// AddHost is POST /api/v1/operator/hosts: a libvirt host to add, checked by
// connecting to it first.
type AddHost struct {
	URI    string            `json:"uri" doc:"a qemu libvirt URI: qemu+tls://host/system, qemu+ssh://user@host/system, qemu+tcp://host:port/system"`
	Labels map[string]string `json:"labels,omitempty" doc:"key=value labels tenant host constraints pick hosts by"`
}

// HostAction is the body of POST /api/v1/operator/hosts/{cordon,uncordon,drain,remove}.
type HostAction struct {
	URI    string `json:"uri"`
	Reason string `json:"reason,omitempty" doc:"why (cordon, drain), shown with the host"`
	Force  bool   `json:"force,omitempty" doc:"cordon or drain even the last active host (no VM can start anywhere then)"`
}

// HostConstraint is GET/PUT /api/v1/tenants/{id}/host-constraint: the
// labels every host of the tenant's new VMs must carry (empty: any host).
type HostConstraint struct {
	TenantID  string            `json:"tenant_id"`
	Labels    map[string]string `json:"labels"`
	UpdatedAt *string           `json:"updated_at,omitempty" format:"date-time"`
}
