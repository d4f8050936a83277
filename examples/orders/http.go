package orders

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
)

// maxBody bounds a request body.
const maxBody = 64 << 10

// creator is what the HTTP handler needs from a Store.
type creator interface {
	Create(ctx context.Context, customer CustomerID, amount Amount) (Order, error)
	Get(ctx context.Context, id OrderID) (Order, error)
	Pay(ctx context.Context, id OrderID) (Order, bool, error)
}

// Handler serves the order API:
//
//	POST /orders       {"customer_id": "<uuid>", "amount_cents": 2999} -> 201 and the order
//	GET  /orders/{id}  -> 200 and the order, or 404
//	POST /orders/{id}/pay -> 200 and {"order": ..., "reminder_cancelled": true}, or 404 unless created
//	GET  /healthz      -> 200
//
// A rejected request gets 400 and {"error": "...", "field": "..."} naming the field at fault
// ("body" when the body is not a JSON object); nothing is written.
func Handler(store creator, log *slog.Logger) http.Handler {
	h := &api{store: store, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", h.create)
	mux.HandleFunc("GET /orders/{id}", h.get)
	mux.HandleFunc("POST /orders/{id}/pay", h.pay)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

type api struct {
	store creator
	log   *slog.Logger
}

// createRequest keeps each field raw so that every error can name its field.
type createRequest struct {
	CustomerID  json.RawMessage `json:"customer_id"`
	AmountCents json.RawMessage `json:"amount_cents"`
}

// fieldError is a rejected request: the field at fault and why.
type fieldError struct{ field, reason string }

func (e *fieldError) Error() string { return e.field + ": " + e.reason }

func (h *api) create(w http.ResponseWriter, r *http.Request) {
	customer, amount, err := decodeCreate(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	o, err := h.store.Create(r.Context(), customer, amount)
	if err != nil {
		h.log.Error("create order", "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error"})
		return
	}
	writeJSON(w, http.StatusCreated, o)
}

func (h *api) get(w http.ResponseWriter, r *http.Request) {
	id, err := ParseOrderID(r.PathValue("id"))
	if err != nil {
		writeBadRequest(w, &fieldError{"id", err.Error()})
		return
	}
	o, err := h.store.Get(r.Context(), id)
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "order not found", "field": "id"})
	case err != nil:
		h.log.Error("get order", "order_id", id, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error"})
	default:
		writeJSON(w, http.StatusOK, o)
	}
}

// payResponse is the answer to a payment: the order, and whether its reminder was still waiting.
type payResponse struct {
	Order             Order `json:"order"`
	ReminderCancelled bool  `json:"reminder_cancelled"`
}

func (h *api) pay(w http.ResponseWriter, r *http.Request) {
	id, err := ParseOrderID(r.PathValue("id"))
	if err != nil {
		writeBadRequest(w, &fieldError{"id", err.Error()})
		return
	}
	o, cancelled, err := h.store.Pay(r.Context(), id)
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such order awaiting payment", "field": "id"})
	case err != nil:
		h.log.Error("pay order", "order_id", id, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error"})
	default:
		writeJSON(w, http.StatusOK, payResponse{Order: o, ReminderCancelled: cancelled})
	}
}

// decodeCreate reads a create request; its errors are *fieldError.
func decodeCreate(body io.Reader) (CustomerID, Amount, error) {
	var req createRequest
	if err := decodeStrict(body, &req); err != nil {
		return CustomerID{}, Amount{}, err
	}
	customer, err := parseCustomer(req.CustomerID)
	if err != nil {
		return CustomerID{}, Amount{}, err
	}
	var amount Amount
	if isMissing(req.AmountCents) {
		return CustomerID{}, Amount{}, &fieldError{"amount_cents", "required"}
	}
	if err := amount.UnmarshalJSON(req.AmountCents); err != nil {
		return CustomerID{}, Amount{}, &fieldError{"amount_cents", err.Error()}
	}
	return customer, amount, nil
}

// decodeStrict decodes one JSON object with no unknown fields and nothing after it.
func decodeStrict(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return &fieldError{strings.Trim(name, `"`), "unknown field"}
		}
		return &fieldError{"body", fmt.Sprintf("not a JSON object: %v", err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &fieldError{"body", "more than one JSON value"}
	}
	return nil
}

func parseCustomer(raw json.RawMessage) (CustomerID, error) {
	if isMissing(raw) {
		return CustomerID{}, &fieldError{"customer_id", "required"}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return CustomerID{}, &fieldError{"customer_id", "must be a UUID string"}
	}
	id, err := ParseCustomerID(s)
	if err != nil {
		return CustomerID{}, &fieldError{"customer_id", err.Error()}
	}
	return id, nil
}

func isMissing(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

func writeBadRequest(w http.ResponseWriter, err error) {
	var fe *fieldError
	if !errors.As(err, &fe) {
		fe = &fieldError{"body", err.Error()}
	}
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": fe.Error(), "field": fe.field})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
