package rlsclient

// LeaseHeaderForTest is the header the client reads leases from.
const LeaseHeaderForTest = leaseHeader
