package api

import "encoding/json"

// UsageTotals is usage over a period, in the units the export uses.
type UsageTotals struct {
	Cost            json.Number `json:"cost" doc:"priced by the price book in force at each hour; an exact decimal, the sum of the export's BilledCost"`
	Currency        string      `json:"currency" doc:"ISO 4217"`
	VCPUSeconds     float64     `json:"vcpu_seconds" doc:"vCPUs held x seconds"`
	GiBSeconds      float64     `json:"gib_seconds" doc:"GiB of memory held x seconds"`
	CPUSeconds      float64     `json:"cpu_seconds" doc:"CPU time the sandboxes' cgroups measured"`
	WallSeconds     float64     `json:"wall_seconds" doc:"how long sandboxes held their allocation"`
	EgressBytes     int64       `json:"egress_bytes" doc:"through the egress gateway, both directions"`
	EgressUpBytes   int64       `json:"egress_up_bytes"`
	EgressDownBytes int64       `json:"egress_down_bytes"`
	MemoryPeakBytes int64       `json:"memory_peak_bytes" doc:"the highest a sandbox reached"`
}

// UsageDay is one UTC day of the summary.
type UsageDay struct {
	Day string `json:"day" format:"date" doc:"YYYY-MM-DD, UTC"`
	UsageTotals
}

// UsageLine is one line of a top list of the summary.
type UsageLine struct {
	Key   string `json:"key" doc:"sandbox id, user (or token) id, or template name"`
	Label string `json:"label" doc:"for people: short id and template, the user's name"`
	UsageTotals
}

// UsageTop is the top 10 of the summary by cost.
type UsageTop struct {
	Sandboxes []UsageLine `json:"sandboxes" nonnull:"true"`
	Users     []UsageLine `json:"users" nonnull:"true"`
	Templates []UsageLine `json:"templates" nonnull:"true"`
}

// UsageSummary answers GET /api/v1/usage/summary.
type UsageSummary struct {
	Tenant    string      `json:"tenant" doc:"the tenant's slug"`
	From      string      `json:"from" format:"date-time" doc:"start of the period"`
	To        string      `json:"to" format:"date-time" doc:"end of the period (exclusive)"`
	Totals    UsageTotals `json:"totals"`
	Sandboxes int         `json:"sandboxes" doc:"sandboxes that used anything in the period"`
	Daily     []UsageDay  `json:"daily" nonnull:"true"`
	Top       UsageTop    `json:"top"`
}

// UsagePeriod is the period of a usage query.
type UsagePeriod struct {
	From string `query:"from" doc:"start: RFC 3339 time or date (UTC midnight); default the first day of this month"`
	To   string `query:"to" doc:"end: RFC 3339 time (exclusive) or date (inclusive of that whole day); default the end of from's month; at most 366 days after from"`
}

// UsageExportQuery is the period and format of a usage export.
type UsageExportQuery struct {
	From   string `query:"from" doc:"start: RFC 3339 time or date (UTC midnight); default the first day of this month"`
	To     string `query:"to" doc:"end: RFC 3339 time (exclusive) or date (inclusive of that whole day); default the end of from's month"`
	Format string `query:"format" enum:"csv,json" doc:"csv (default) or json"`
}

// UsageExportRow is one FOCUS row of a usage export: one sandbox, ledger
// hour and meter. The CSV has these columns, in this order.
type UsageExportRow struct {
	BillingPeriodStart string            `json:"BillingPeriodStart" format:"date-time" doc:"first instant of the calendar month (UTC) of the charge"`
	BillingPeriodEnd   string            `json:"BillingPeriodEnd" format:"date-time" doc:"first instant of the next month"`
	ChargePeriodStart  string            `json:"ChargePeriodStart" format:"date-time" doc:"the ledger hour"`
	ChargePeriodEnd    string            `json:"ChargePeriodEnd" format:"date-time" doc:"one hour later"`
	ChargeCategory     string            `json:"ChargeCategory,omitempty" doc:"Usage"`
	ChargeDescription  string            `json:"ChargeDescription,omitempty" doc:"what was metered, in words"`
	SubAccountID       string            `json:"SubAccountId,omitempty" doc:"the tenant's id"`
	SubAccountName     string            `json:"SubAccountName,omitempty" doc:"the tenant's slug"`
	ResourceID         string            `json:"ResourceId" doc:"the sandbox's id"`
	ResourceType       string            `json:"ResourceType" doc:"Sandbox"`
	ServiceName        string            `json:"ServiceName" doc:"Stockade Sandboxes"`
	SkuID              string            `json:"SkuId,omitempty" enum:"vcpu-allocated,memory-allocated,cpu-measured,egress"`
	ConsumedQuantity   json.Number       `json:"ConsumedQuantity" doc:"an exact decimal"`
	ConsumedUnit       string            `json:"ConsumedUnit" enum:"vCPU-Seconds,GiB-Seconds,CPU-Seconds,GB"`
	ListUnitPrice      json.Number       `json:"ListUnitPrice" doc:"per ConsumedUnit, in force at ChargePeriodStart"`
	BilledCost         json.Number       `json:"BilledCost" doc:"ConsumedQuantity × ListUnitPrice, an exact decimal (no rounding)"`
	BillingCurrency    string            `json:"BillingCurrency" doc:"ISO 4217"`
	Tags               map[string]string `json:"Tags" doc:"tenant (slug), template, user (id), user_name"`
}

// QuotaLine is one limit of the tenant quota with what is held or used.
type QuotaLine struct {
	Name  string  `json:"name" enum:"max_sandboxes,max_vcpus,max_memory_mib,max_vms,max_cpu_hours_monthly"`
	Label string  `json:"label" doc:"for people"`
	Used  float64 `json:"used"`
	Limit float64 `json:"limit"`
	Share float64 `json:"share" doc:"used / limit (1 when the limit is 0 and something is used)"`
	Warn  bool    `json:"warn" doc:"at 80 % of the limit or more"`
	Over  bool    `json:"over" doc:"at the limit: no more of it can be had"`
}

// QuotaReport answers GET /api/v1/quota.
type QuotaReport struct {
	Tenant string      `json:"tenant" doc:"the tenant's slug"`
	WarnAt float64     `json:"warn_at" doc:"the share from which warn is set (0.8)"`
	Quotas []QuotaLine `json:"quotas"`
}
