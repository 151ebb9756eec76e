package views

import (
	"strconv"
	"time"
)

// Navigation keys of the operators' usage, prices and quota pages.
const (
	NavOperatorUsage = "operator-usage"
	NavPrices        = "prices"
)

// OperatorUsageView is the operators' usage across tenants for a period.
type OperatorUsageView struct {
	From, To string // the period's dates as the form shows them (To inclusive)
	// PeriodLabel says the period in words ("November 2026").
	PeriodLabel string
	PrevHref    string // the month before
	NextHref    string // the month after
	Rows        []OperatorUsageRow
	// Totals are the sums of Rows per currency (costs in different
	// currencies are never added).
	Totals     []OperatorUsageRow
	ExportCSV  string // links to the all-tenants export
	ExportJSON string
	Errors     map[string]string // period fields at fault
}

// OperatorUsageRow is one tenant's usage (or a total line).
type OperatorUsageRow struct {
	Slug, Name  string
	Cost        Amount
	Currency    string
	VCPUHours   float64
	GiBHours    float64
	CPUHours    float64
	EgressBytes int64
	WallHours   float64
	// PricesHref and QuotaHref lead to the tenant's price book and quota.
	PricesHref, QuotaHref string
}

// PricesView is the price book editor: the platform list price with its
// history, and one tenant's overrides.
type PricesView struct {
	Platform        PriceRow   // the version in force now
	PlatformHistory []PriceRow // newest first
	PlatformForm    PriceForm
	// DefaultInForce: no platform version was ever set; the built-in list
	// price applies.
	DefaultInForce bool
	Tenants        []Choice // slug -> "slug (name)"
	// Tenant is the chosen tenant's slug ("" none chosen).
	Tenant        string
	TenantName    string
	TenantCurrent PriceRow // what the tenant pays now (its override or the platform's)
	// TenantOverride: TenantCurrent is the tenant's own version.
	TenantOverride bool
	TenantHistory  []PriceRow
	TenantForm     PriceForm
	// Overrides lists every tenant with an override in force now.
	Overrides []PriceOverrideRow
}

// PriceRow is one version of a price book.
type PriceRow struct {
	ID             string
	Currency       string
	VCPUSecond     float64
	GiBSecond      float64
	CPUSecond      float64
	EgressGB       float64
	VolumeGiBMonth float64
	EffectiveFrom  time.Time
	CreatedBy      string
	CreatedAt      time.Time
	// Current: the version in force now; Future: not yet in force.
	Current, Future bool
}

// PriceOverrideRow is a tenant whose own price is in force.
type PriceOverrideRow struct {
	Slug  string
	Price PriceRow
}

// PriceForm is the add-a-version form's values and field errors.
type PriceForm struct {
	Currency, VCPUSecond, GiBSecond, CPUSecond, EgressGB, VolumeGiBMonth string
	EffectiveFrom                                                        string // datetime-local, UTC; "" now
	Errors                                                               map[string]string
}

// TenantQuotasView is the quota editor on the operators' tenant page.
type TenantQuotasView struct {
	Rows []TenantQuotaRow
}

// TenantQuotaRow is one tenant's quota form.
type TenantQuotaRow struct {
	ID, Slug string
	// Values are the form's values by quota name (max_vms, ...).
	Values    map[string]string
	Errors    map[string]string
	UpdatedAt time.Time
	UpdatedBy string
}

// OperatorQuotaFields are the quota form's fields, in order: name, label, hint.
func OperatorQuotaFields() [][3]string {
	return [][3]string{
		{"max_sandboxes", "Sandboxes", "running at once"},
		{"max_vcpus", "vCPUs", "of running sandboxes and VMs"},
		{"max_memory_mib", "Memory (MiB)", "of running sandboxes and VMs"},
		{"max_vms", "VMs", "booted at once"},
		{"max_cpu_hours_monthly", "CPU-hours / month", "measured; UTC calendar month"},
		{"max_template_mib", "Templates (MiB)", "the tenant's own template images"},
		{"max_volume_gib", "Volumes (GiB)", "sizes of the tenant's volumes, in all"},
	}
}

// opMoney shows a cost to the cent, or to more digits when it is below one.
func opMoney(a Amount, currency string) string {
	prec := 2
	if a.Value != 0 && a.Value < 0.1 {
		prec = 4 // a small cost is not rounded to nothing
	}
	return a.text(prec) + " " + currency
}

// opUnitPrice shows a price per unit with all its digits.
func opUnitPrice(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func opHours(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// opGB shows bytes in GB (10^9, the unit prices use).
func opGB(b int64) string { return strconv.FormatFloat(float64(b)/1e9, 'f', 3, 64) }
