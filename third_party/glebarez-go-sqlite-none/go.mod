module github.com/glebarez/go-sqlite

go 1.21
