// Package proto holds envd's two protos as the e2b@2.51.0 SDK embeds them
// (E2B.md Appendix 1) and the Go generated from them (protoc-gen-go and
// protoc-gen-connect-go, run by buf): process/ and filesystem/.
package proto

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
