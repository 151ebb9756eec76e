// Package isolation holds the cross-tenant accounting suite of the stores
// (store_test.go): every exported method of every tenant-scoped store is
// found by reflection, and one that takes a tenant but has no isolation case
// fails the suite ("method X never called"), the way coder's dbauthz
// MethodTestSuite accounts for every query. Nothing here is imported.
package isolation
