// Package file is the records of files and uploads as they are stored
// (docs/api.md "Files"): internal/files makes and reads them, internal/store
// keeps them, the output and error files of a batch are made by
// internal/part.
package file

import "errors"

// File is an OpenAI File object plus where its bytes live.
type File struct {
	ID            string  `json:"id" dynamodbav:"id"`
	Object        string  `json:"object" dynamodbav:"-"`
	Bytes         int64   `json:"bytes" dynamodbav:"bytes"`
	CreatedAt     int64   `json:"created_at" dynamodbav:"created_at"`
	Filename      string  `json:"filename" dynamodbav:"filename"`
	Purpose       string  `json:"purpose" dynamodbav:"purpose"`
	Status        string  `json:"status" dynamodbav:"status"`
	StatusDetails *string `json:"status_details" dynamodbav:"status_details"`
	ExpiresAt     *int64  `json:"expires_at" dynamodbav:"expires_at"`
	// UploadURL is set only in the response that creates a presigned upload.
	UploadURL string `json:"upload_url,omitempty" dynamodbav:"-"`

	Tenant  string   `json:"-" dynamodbav:"tenant"`
	Objects []string `json:"-" dynamodbav:"objects"` // S3 keys, read in order
	// ETag is a presigned upload's object's ETag when it was first seen
	// landed: what was validated, which batches pin (batch.Object).
	ETag string `json:"-" dynamodbav:"etag,omitempty"`
	// Readers are the unfinished batches that read the file
	// (files.Service.Hold); a file deleted while it has any is Deleted:
	// gone for the API, its objects kept until the last of them ends
	// (Release; docs/api.md "Files", deleting an input).
	Readers []string `json:"-" dynamodbav:"readers,stringset,omitempty"`
	Deleted bool     `json:"-" dynamodbav:"deleted,omitempty"`
}

// Upload is an OpenAI Upload object.
type Upload struct {
	ID        string `json:"id" dynamodbav:"id"`
	Object    string `json:"object" dynamodbav:"-"`
	Bytes     int64  `json:"bytes" dynamodbav:"bytes"`
	CreatedAt int64  `json:"created_at" dynamodbav:"created_at"`
	Filename  string `json:"filename" dynamodbav:"filename"`
	Purpose   string `json:"purpose" dynamodbav:"purpose"`
	MimeType  string `json:"-" dynamodbav:"mime_type"`
	Status    string `json:"status" dynamodbav:"status"` // pending|completed|cancelled|expired
	ExpiresAt int64  `json:"expires_at" dynamodbav:"expires_at"`
	File      *File  `json:"file" dynamodbav:"-"`
	FileID    string `json:"-" dynamodbav:"file_id"`
	// FileExpiresAfter is the expires_after of the file it will become, in seconds.
	FileExpiresAfter int64 `json:"-" dynamodbav:"file_expires_after"`
	// Parts and PartBytes count the parts added (or being added) and their
	// bytes, bounded by files.MaxUploadParts and files.MaxUploadBytes.
	Parts     int   `json:"-" dynamodbav:"parts"`
	PartBytes int64 `json:"-" dynamodbav:"part_bytes"`
	// PartLimit tells clients how big a part may be (extension).
	PartLimit int64  `json:"part_size_limit" dynamodbav:"-"`
	Tenant    string `json:"-" dynamodbav:"tenant"`
}

// Page is one page of a list.
type Page struct {
	Limit  int
	After  string // an id: list what comes after it
	Order  string // "desc" (default) or "asc"
	Filter string // purpose
}

// ErrNotFound is what a store (files.Store) returns for a missing record.
var ErrNotFound = errors.New("files: not found")
