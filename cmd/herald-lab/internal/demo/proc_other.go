//go:build !linux

package demo

import "syscall"

func childProcAttr() *syscall.SysProcAttr { return nil }
