// The module of the code `buf generate` writes here (the protos' go_package); the client's
// go.mod points its import path at this directory.
module kube-gateway.local/gen/go

go 1.26.0
