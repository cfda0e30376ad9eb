module github.com/asynqlock/asynqlock/scripts

go 1.26.0

require golang.org/x/mod v0.43.0

require google.golang.org/genproto v0.0.0-20261026165753-2ffab32bce7e // indirect
