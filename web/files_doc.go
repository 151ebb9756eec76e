package web

import "maps"

// fileErrors are the problem answers of the native file API's routes
// (handlers/files.go), with a route's own on top.
func fileErrors(extra map[int]string) map[int]string {
	errs := map[int]string{
		403: "The sandbox user may not do this there (files belong to uid 1000); nothing changed",
		404: "No such sandbox of the tenant, or no such file",
		409: "The sandbox is not running",
		422: "A path climbs with '..' (paths stay inside the sandbox), or another field is wrong; errors[].field names it",
		503: "The sandbox's VM agent is out of reach",
	}
	maps.Copy(errs, extra)
	return errs
}
